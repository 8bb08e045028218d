"""What crosses between the supervisor and its workers: typed messages (`messages`) and the pipes they
travel on, read by the supervisor as one inbox (`inbox`). Below both sides, so neither imports the other."""
