#!/usr/bin/env bash
# Re-create the committed chapter notebooks from their MyST sources and execute them,
# so that the outputs stored in book/*.ipynb (what nbval compares against, and what
# GitHub/Colab show before running) are those of a fresh run.
#   book/_scripts/refresh_notebooks.sh                 # all chapters
#   book/_scripts/refresh_notebooks.sh 03_gradient_descent 06_phase_transition
set -euo pipefail
cd "$(dirname "$0")/../.."
# the stored explorer outputs leave BokehJS to the page (as in the book), instead of 1.6 MB
# of it inline per explorer; a reader who runs the cell gets the inline one
export ATTNLAB_EXPLORER_BOKEHJS=page
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=($(cd book/md && ls *.md | sed 's/\.md$//'))
fi
for name in "${names[@]}"; do
  jupytext --sync "book/md/${name}.md" >/dev/null
  start=$(date +%s)
  python - "book/${name}.ipynb" <<'PY'
import sys
import uuid
from pathlib import Path

import nbformat
from nbclient import NotebookClient

path = Path(sys.argv[1])
nb = nbformat.read(path, as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=False,
               resources={"metadata": {"path": str(path.parent)}}).execute()
for cell in nb.cells:                      # no run-specific metadata in the committed file
    cell.metadata.pop("execution", None)
    # consecutive prints to one stream arrive in chunks that depend on timing: merge them,
    # as the book build does (nb_merge_streams), so two runs store the same outputs
    merged = []
    for out in cell.get("outputs", []):
        if (merged and out.output_type == "stream" and merged[-1].output_type == "stream"
                and merged[-1].name == out.name):
            merged[-1].text += out.text
        else:
            merged.append(out)
    if cell.cell_type == "code":
        cell.outputs = merged
    # a widget's model id is random and its model is not stored (store_widget_state=False):
    # a name from the notebook and the cell instead, so that two runs store the same file
    for k, out in enumerate(cell.get("outputs", [])):
        view = out.get("data", {}).get("application/vnd.jupyter.widget-view+json")
        if view is not None:
            view["model_id"] = uuid.uuid5(uuid.NAMESPACE_URL, f"attnlab/{path.name}/{cell.get('id')}/{k}").hex
nb.metadata.pop("widgets", None)
nbformat.write(nb, path)
PY
  echo "${name}: executed in $(( $(date +%s) - start )) s"
done
