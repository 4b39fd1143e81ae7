"""The read model of jobs: the `job_states` topic materialised into a local RocksDB.

`store.JobView` holds it (its layout is keys.py's), `apply.py` turns a batch of
records into the writes that keep its indexes, `follower.py` follows the topic
into it, `queue_stats.py` counts each queue's activity by the minute, and the
events feed (events.py, event_feed.py, event_cursor.py) derives and keeps the
lifecycle events. The HTTP binding, the CLI and bench read it; nothing here decides.
"""
