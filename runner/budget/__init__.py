"""What a run may spend and how fast: the rate limits every process shares (`ratelimit`), the adaptive
concurrency window (`throttle`), which run goes first under a budget (`priority`), and how many records run
at once, as workers x slots (`concurrency`)."""
