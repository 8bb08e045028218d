"""One worker process: its loop (`main`), its sandbox kept alive and replaced once for every slot
(`keeper`), the slots that each run one record on their own database under a clock (`slot`), and its
heartbeat (`vitals`)."""
