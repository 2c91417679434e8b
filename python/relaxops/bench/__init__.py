"""The microbenchmark harness (``python -m relaxops bench``): cases per family (``sortnet``, ``topk``, ``logic``,
``render``) timed for each provider, ours and the original libraries, in the same run (``run.py``)."""
