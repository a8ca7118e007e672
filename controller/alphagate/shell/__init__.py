"""The shell: everything that does I/O around the decision core, by job.

    reconciler  one evaluation of one SpeculativeCanary: read, observe, evaluate, act, report
    exporter    the controller's own metrics (Recorder) and its /metrics, /healthz server
    controller  one running replica: reconciler loops, leader election, metrics server

Below it: the core (decisions), sources (metrics) and kube (API calls, status, Events).
Above it: the commands. Nothing here parses command-line flags.
"""
