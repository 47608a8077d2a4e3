#!/bin/bash
# The CVT studies of docs/experiments/cvt.md on a GPU machine, as one command that stops at a
# deadline: every run is cached by experiments.cvt under $W (default runs/gpu), so a second call
# resumes where the first stopped.
#
#   experiments/cvt_gpu.sh prepare                 # here, with ../shared: the data the GPU reads
#   experiments/cvt_gpu.sh SECONDS [QUEUE]         # there (carry .cvt_bundle); then pack $W
#
# QUEUE, each CVT at a quarter of the paper's loss weight (`small-cpu`, the weight of the CPU
# tables) against supervised training unless named otherwise:
#   length (default): all labeled POS and parsing data, seed 2 to 2,000 steps (a third seed of
#     the `quarter` table) beside seed 0 to 4,000 (chunking's ran on a CPU). Ran 2026-11-27 as
#     `555 length` then `235 length`: everything but CVT's last 1,000 steps of seed 0;
#   quarter: all labeled data, seeds 0-1 to 2,000 steps (ran 2026-11-27, 10 runs in 459 s);
#   paper: the 1,000-label and full-data grids at the paper's weight beside the quarter weight,
#     then word2vec, the ablations on chunking and longer scarce-label curves.
# The GPU machine sees neither ../shared nor a package index; `prepare` copies CoNLL-2000,
# UD EWT, NLTK Reuters and the word2vec vectors (`electra cvt-vectors`, runs/cvt_vectors) into
# .cvt_bundle (26 MB).
# Runs share the GPU by time slices. On an H100, 12 at once took 0.13 s per supervised step,
# 0.36 per CVT step and 0.52 per multi-task step each, about 6.5 GB of GPU memory each
# (2026-11-26); with expandable segments, 10 at once took 0.12 and 0.27 s, 2.5 GB each
# (2026-11-27); eight at a time (`length`), 0.10-0.11 and 0.25-0.27 s. So `length` needs about
# 16 minutes (4,000 CVT steps, faster once seed 2's runs end), longer than the GPU machine
# was available.
# A CPU dry run, with a python3 that has torch first on PATH:
#   W=/tmp/dry DEV=cpu J=1 S1=4,8 S2=4,8 S3=4,8,12 SF=4 SL=4,8 SMOKE=3 ... 900 QUEUE
set -u
B=.cvt_bundle; W=${W:-runs/gpu}; DEV=${DEV:-cuda}; J=${J:-6}; SMOKE=${SMOKE:-20}
S1=${S1:-500,1000,2000}; S2=${S2:-1000,2000}; S3=${S3:-500,1000,2000,4000}; SF=${SF:-1000}
SL=${SL:-1000,2000,3000,4000}
if [ "${1:-}" = prepare ]; then
  mkdir -p $B && cp -r ../shared/data/conll2000 ../shared/data/ud_english_ewt \
    ../shared/data/corpus/nltk/reuters.jsonl.gz runs/cvt_vectors/reuters-w2v-100.txt $B/ && du -sh $B
  exit
fi
end=$(( $(date +%s) + $1 )); queue=${2:-length}
export OMP_NUM_THREADS=1 PYTHONPATH=src:. PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # less cached memory per process
left() { echo $(( end - $(date +%s) )); }
cvt() {  # WORK ARGS...: one experiments.cvt invocation, cut at the deadline
  local work=$1; shift; [ "$(left)" -gt 5 ] || return
  timeout "$(left)" python3 -m experiments.cvt --work $W/$work --device $DEV --threads 1 \
    --data chunk=$B/conll2000 --data pos=$B/ud_english_ewt --data dep=$B/ud_english_ewt \
    --unlabeled $B/reuters.jsonl.gz "$@" > $W/$work.log 2>&1
  local rc=$?
  echo "$(date +%T) $work rc=$rc left=$(left)s" | tee -a $W/queue.log
}
smoke() {  # 20 steps of every task and method; stops the script if they fail
  cvt smoke --tasks chunk,dep --sizes 1000 --seeds 0 --methods supervised,cvt,multitask --steps $SMOKE --jobs 3
  grep -q '"table"' $W/smoke.log || { tail -40 $W/smoke.log; exit 1; }
}
Q="--methods supervised,cvt --preset small-cpu --sizes full"  # the quarter weight, all labels
queue_quarter() {  # 10 runs: seed 0 of POS and parsing and seed 1 of every task
  cvt q-full-s0 --tasks pos,dep --seeds 0 --steps $S2 $Q --jobs 4 & local a=$!
  cvt q-full-chunk-s1 --tasks chunk --seeds 1 --steps $S2 $Q --jobs 2 & local b=$!
  cvt q-full-s1 --tasks pos,dep --seeds 1 --steps $SF $Q --jobs 4 & local c=$!
  wait $a $b $c
}
queue_length() {  # 8 runs
  local q="$Q --tasks pos,dep"
  cvt q-full-s2 --seeds 2 --steps $S2 $q --jobs 4 & local a=$!
  cvt q-full-s0-long --seeds 0 --steps $SL $q --jobs 4 & local b=$!
  wait $a $b
}
queue_paper() {
  smoke
  local grid="--seeds 0,1,2 --methods supervised,cvt,multitask --jobs $J"
  local cpu="--seeds 0,1,2 --methods cvt,multitask --jobs $J --preset small-cpu"
  cvt base-1000 --tasks chunk,pos,dep --sizes 1000 --steps $S1 $grid & local a=$!
  cvt cpu-1000 --tasks chunk,pos,dep --sizes 1000 --steps $S1 $cpu & local b=$!
  wait $a $b
  cvt base-full --tasks chunk,pos,dep --sizes full --steps $S2 $grid & a=$!
  cvt cpu-full --tasks chunk,pos,dep --sizes full --steps $S2 $cpu & b=$!
  wait $a $b
  cvt w2v-1000 --tasks chunk,pos,dep --sizes 1000 --steps $S1 $grid \
    --word-vectors $B/reuters-w2v-100.txt & a=$!
  abl() { for x in "$@"; do cvt abl-${x/=/-} --tasks chunk --sizes 1000 --seeds 0,1,2 \
    --methods cvt --steps $S1 --jobs 3 --set cvt.$x; done; }
  abl cvt_weight=0.5 full_view_aux=false keep_unlabeled=1.0 keep_unlabeled=0.5 ema_decay=0.0 & b=$!
  wait $a $b
  cvt base-1000 --tasks chunk,pos,dep --sizes 1000 --seeds 0,1,2 --methods supervised,cvt \
    --steps $S3 --jobs $((2*J))
}
mkdir -p $W
(while [ "$(left)" -gt 0 ]; do nvidia-smi --query-gpu=utilization.gpu,memory.used \
   --format=csv,noheader >> $W/gpu_util.log 2>/dev/null; sleep 10; done) & monitor=$!
queue_$queue
kill $monitor  # so a queue that ends early does not hold the machine until the deadline
