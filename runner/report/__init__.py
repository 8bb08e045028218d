"""Results shown: the terminal summary, report.json and report.html (`build`, with `html`, `charts`,
`records`, `anatomy`, `paired`, `trials` drawing their parts), `runner report A B` (`compare`) and
`runner show` (`explain`)."""
