"""The shell: everything that does I/O around the decision core, by job.

    watch         the list+watch cache and the schedule: when to evaluate what (WatchLoop)
    reconciler    one evaluation of one SpeculativeCanary: read, observe, evaluate, act
    outcome       what one evaluation did (Outcome), and its small steps
    reporting     the Recorder seam (metrics) and the structured decision log line
    exporter      the controller's own metrics (the real Recorder)
    metric_names  the metrics' names and bounded label vocabularies
    server        /metrics, /healthz and /readyz over HTTP
    controller    one running replica: reconciler loops, leader election, metrics server

and the reconciler's steps (claims, observing, cycles, unit, insight, act, manual, warnings,
source_cache, api_budget) and the metrics' families (metric_families, shard_metrics):
docs/architecture.md places each module.

Below it: the core (decisions), sources (metrics) and kube (API calls, status building,
Events). Above it: the commands. Nothing here parses command-line flags.
"""
