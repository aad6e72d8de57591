"""Raft for the cluster metadata log (the controller quorum); see docs/raft.md.

`core` is the pure per-voter state machine (events in, effects out; its vocabulary in `messages`), `storage` the durable files of
a voter, `state_machine` the interface of what the log drives. `ingest_api.cluster.quorum.QuorumHost`
hosts it in a node: it feeds `Tick`s and received messages to `RaftCore.step`, carries out the
effects in order (persist, then send / apply) and restarts from `RaftStorage.load()` after a crash.
"""
