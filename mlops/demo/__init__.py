"""`mlops demo`: the whole story on one machine, driven the way a person would.

`scenarios` says what each push changes (pure), `timeline` turns what was
observed into durations (pure), `watch` reads weights and per-version
metrics, `story` plays it all with real git, Prometheus, HAProxy and Paddle.
"""
