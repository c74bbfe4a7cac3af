#!/bin/bash
# The five traces of a reader following rbplab (issue 39), counted by scripts/module_trace.py in the
# checkout $1 (run with its own .venv; the script is this one's, so an older checkout can be measured).
# Prints per trace the count to the first written shard (where it writes one) and the machine's count (whole run).
# Usage: scripts/module_traces.sh CHECKOUT OUT_FILE
MT=$(cd "$(dirname "$0")" && pwd)/module_trace.py; REPO=$1; OUT=$(realpath -m "$2"); cd "$REPO"; PY=.venv/bin/python
export RBPLAB_CACHE=$(mktemp -d); unset RBPLAB_DEBUG
M='["micro-1-25K", "micro-2-85K"], ["humaneval"]'
GRID="Grid.from_names($M, max_tokens=3000)"
summ() { grep -E "modules, .* entries|files whose functions ran" | sed 's/ (rbplab.*//'; }
{
echo "== 1 rbplab extract -m micro-1-25K micro-2-85K -c humaneval --max-tokens 3000"
echo "-- to the first shard written:"; $PY $MT -- extract -m micro-1-25K micro-2-85K -c humaneval --max-tokens 3000 2>/dev/null | summ
rm -rf $RBPLAB_CACHE/*
echo "-- the whole command:"; $PY $MT --stop '' -- extract -m micro-1-25K micro-2-85K -c humaneval --max-tokens 3000 2>/dev/null | summ
echo "== 2 load_study of that grid to Figure 3 (viz.plots.rbp_vs_size)"
$PY $MT --stop '' --python "
from rbplab import Grid, load_study
from rbplab.study import size
from rbplab.viz.plots import rbp_vs_size
study = load_study($GRID)
rbp_vs_size(study.points(1, n_boot=100), size.fits(study, 1), size.bands(study, 1))" 2>/dev/null | summ
echo "== 3 rbplab run of a study file (local executor, 1 worker) to a shard"
STUDY=$(mktemp --suffix=.toml); printf 'models = ["micro-1-25K", "micro-2-85K"]\ncorpora = ["prose"]\n[settings]\nmax_tokens = 3000\n' > $STUDY
echo "-- to the first shard written:"; $PY $MT -- run $STUDY --no-progress 2>/dev/null | summ
echo "== 4 rbplab cache verify on one bad shard"
SHARD=$(find $RBPLAB_CACHE -name "*.parquet" -path "*shard*" | sort | head -1); [ -z "$SHARD" ] && SHARD=$(find $RBPLAB_CACHE -name "*.parquet" | grep -v summary | sort | head -1)
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0xFF; open(p,'wb').write(b)" "$SHARD"
$PY $MT --stop '' -- cache verify 2>/dev/null | summ
echo "== 5 a k slider to its redraw (ScalingView.set_k)"
$PY $MT --stop '' --setup "
from rbplab import Grid, load_study
from rbplab.viz.widgets import ScalingView
view = ScalingView(load_study($GRID))" --python "view.set_k(10)" 2>/dev/null | summ
} > $OUT 2>&1
