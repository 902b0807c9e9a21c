"""What both ways of running a sweep need, the `rag-sweep` CLI's runner (rag_sweep/runner/) and a deployment's
definitions, sensors and fleet workers (rag_sweep/, sensors/, rag_sweep/fleet/); it imports neither of them.

- plans.py: a sweep file's plan with the deployment's settings (the one place that builds it), and the
  definitions a run materializes;
- todo.py: what is complete for the inputs as they are now, and the steps a run has to do;
- search.py: an adaptive search as state in the data dir, replayed by its controller (driven by the CLI
  in process or by a deployment's sensor).
"""
