#!/bin/bash
# The CVT studies of docs/experiments/cvt.md on a lent GPU, as one command that stops at a
# deadline: every run is cached by experiments.cvt under $W (default runs/gpu), so a second call
# resumes where the first stopped.
#
#   experiments/cvt_gpu.sh prepare          # here, with ../shared: the data the GPU reads
#   experiments/cvt_gpu.sh SECONDS          # there (carry .cvt_bundle); then pack $W
#
# The lent machine sees neither ../shared nor a package index; `prepare` copies CoNLL-2000,
# UD EWT, NLTK Reuters and the word2vec vectors (`electra cvt-vectors`, runs/cvt_vectors) into
# .cvt_bundle (26 MB). Order: a 20-step smoke test of every task and method (stops the script
# if it fails); the 1,000-label grid at the paper's loss weight (`small`) beside CVT at a quarter
# of it (`small-cpu`); the same on all labeled data; the word2vec grid beside the CVT ablations
# on chunking; then longer scarce-label curves.
# J runs per invocation share the GPU (12 at once took 0.37 s per CVT step each on an H100,
# 2026-11-26). A CPU dry run: W=/tmp/dry DEV=cpu J=1 S1=4,8 S2=4 S3=4,8,12 SMOKE=3 ... 900
set -u
B=.cvt_bundle; W=${W:-runs/gpu}; DEV=${DEV:-cuda}; J=${J:-6}
S1=${S1:-500,1000,2000}; S2=${S2:-1000,2000}; S3=${S3:-500,1000,2000,4000}; SMOKE=${SMOKE:-20}
if [ "${1:-}" = prepare ]; then
  mkdir -p $B && cp -r ../shared/data/conll2000 ../shared/data/ud_english_ewt \
    ../shared/data/corpus/nltk/reuters.jsonl.gz runs/cvt_vectors/reuters-w2v-100.txt $B/ && du -sh $B
  exit
fi
end=$(( $(date +%s) + $1 ))
export OMP_NUM_THREADS=1 PYTHONPATH=src:. PYTHONUNBUFFERED=1
left() { echo $(( end - $(date +%s) )); }
cvt() {  # WORK ARGS...: one experiments.cvt invocation, cut at the deadline
  local work=$1; shift; [ "$(left)" -gt 5 ] || return
  timeout "$(left)" python3 -m experiments.cvt --work $W/$work --device $DEV --threads 1 \
    --data chunk=$B/conll2000 --data pos=$B/ud_english_ewt --data dep=$B/ud_english_ewt \
    --unlabeled $B/reuters.jsonl.gz "$@" > $W/$work.log 2>&1
  local rc=$?
  echo "$(date +%T) $work rc=$rc left=$(left)s" | tee -a $W/queue.log
}
mkdir -p $W
(while [ "$(left)" -gt 0 ]; do nvidia-smi --query-gpu=utilization.gpu,memory.used \
   --format=csv,noheader >> $W/gpu_util.log 2>/dev/null; sleep 10; done) &
cvt smoke --tasks chunk,dep --sizes 1000 --seeds 0 --methods supervised,cvt,multitask --steps $SMOKE --jobs 3
grep -q '"table"' $W/smoke.log || { tail -40 $W/smoke.log; exit 1; }
grid="--seeds 0,1,2 --methods supervised,cvt,multitask --jobs $J"
cpu="--seeds 0,1,2 --methods cvt,multitask --jobs $J --preset small-cpu"
cvt base-1000 --tasks chunk,pos,dep --sizes 1000 --steps $S1 $grid & a=$!
cvt cpu-1000 --tasks chunk,pos,dep --sizes 1000 --steps $S1 $cpu & b=$!
wait $a $b
cvt base-full --tasks chunk,pos,dep --sizes full --steps $S2 $grid & a=$!
cvt cpu-full --tasks chunk,pos,dep --sizes full --steps $S2 $cpu & b=$!
wait $a $b
cvt w2v-1000 --tasks chunk,pos,dep --sizes 1000 --steps $S1 $grid --word-vectors $B/reuters-w2v-100.txt & a=$!
abl() { for x in "$@"; do cvt abl-${x/=/-} --tasks chunk --sizes 1000 --seeds 0,1,2 --methods cvt --steps $S1 --jobs 3 --set $x; done; }
abl cvt_weight=0.5 full_view_aux=false keep_unlabeled=1.0 keep_unlabeled=0.5 ema_decay=0.0 & b=$!
wait $a $b
cvt base-1000 --tasks chunk,pos,dep --sizes 1000 --seeds 0,1,2 --methods supervised,cvt --steps $S3 --jobs $((2*J))
