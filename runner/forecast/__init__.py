"""What a job will cost and how long it will take, before anything is spent (`runner plan`).

need.py       calls and tokens, summed and scaled: one type for every figure of a forecast
calls.py      a harness's foreseen calls (runner/harness/base.CallShape) priced into tokens as each
              provider bills and limits them: prompt caching, thinking
measured.py   what an earlier output of the same runs measured, per record and role
tiers.py      the providers' published rate-limit tiers (runner/budget/published.yaml)
floor.py      the time the rate limits alone force, and which limit binds
forecast.py   the whole: per run, records, calls, tokens, cost (low / expected / high; interactive,
              with prompt caching, batch) and time; and its JSON form, kept in the output
render.py     the forecast as a terminal table, and beside what a run then did
"""
