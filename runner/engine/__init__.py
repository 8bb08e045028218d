"""The supervisor's side: one loop with one inbox (`supervisor`), the pure bookkeeping of who holds what and
until when (`scheduler`), what each worker is sent next (`dispatch`), the only writer of results
(`recorder`), the worker processes (`pool`, or Ray actors: `ray_executor`), the servers watched like workers
(`services`), signals counted where they land (`signals`) and the progress display (`progress`)."""
