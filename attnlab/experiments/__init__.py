"""Experiments: the paper's figures as resumable, parallel sweeps with cached, provenanced tables.

Modules, each one concept, imported one way (``figures`` -> ``sweeps`` -> ``store`` -> ``runners``):

* :mod:`~attnlab.experiments.runners`: run specifications (``grid``, ``spec_key``) and the two
  tasks that turn a spec into table rows, a finite-``d`` simulation and a state-evolution task;
* :mod:`~attnlab.experiments.store`: the tidy table on disk (strict reading, atomic writes,
  the lock, the provenance sidecar) and where the cached tables are (the repository, or the
  copy installed with attnlab);
* :mod:`~attnlab.experiments.sweeps`: resumable sweeps on joblib workers, sessions recorded
  in the provenance;
* :mod:`~attnlab.experiments.figures`: the registry of the paper's figures (``attnlab
  reproduce``) and the loaders the book uses (``load_results``, ``describe_results``,
  ``load_book_data``).
"""
