"""Numbers from results, drawn nowhere: a run's metrics (`metrics`), intervals and tests (`stats`), trials
of one record (`trials`), and two runs compared on the records both finished (`paired`)."""
