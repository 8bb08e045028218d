"""A record's result and where results go: the typed `Result` (`result`), the run's files written by the
supervisor alone (`sink`), and `runner merge` of shard outputs (`merge`)."""
