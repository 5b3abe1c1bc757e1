#!/usr/bin/env bash
# Grade a class on a Slurm cluster: one array task per shard, then one job that merges them.
#
#   mkdir -p grades/logs
#   jobid=$(sbatch --parsable docs/grading/slurm-array.sh /shared/week1)
#   sbatch --dependency=afterany:"$jobid" --output=grades/logs/merge-%j.out \
#       --wrap '.venv/bin/python -m course_tools.grade merge grades/shard-* --out grades/week1'
#
# Submit from the course folder (it holds .venv, set up with `make setup`, and solutions/), on a
# file system every node sees. Task K of N grades the K-th slice of the class (--shard K/N): every
# task reads the same submissions and keeps its own slice, so the shards never overlap. The merge
# runs after every task ended (afterany), and refuses to write a report if a shard is missing: the
# failed task is named, rerun it with `sbatch --array=K docs/grading/slurm-array.sh ...`, then merge.
#
# Change --array to 1-N for N shards (one shard is a few submissions per CPU-hour; see
# docs/grading.md). Each task grades -j submissions at a time, one per 2 CPUs.
#SBATCH --job-name=course-grade
#SBATCH --array=1-8
#SBATCH --cpus-per-task=4
#SBATCH --mem-per-cpu=2G
#SBATCH --time=04:00:00
#SBATCH --output=grades/logs/%x-%A_%a.out

set -euo pipefail

if [ "$#" -lt 1 ]; then
    echo "usage: sbatch docs/grading/slurm-array.sh SUBMISSION... (from the course folder)" >&2
    exit 2
fi
K="${SLURM_ARRAY_TASK_ID:?submit this script with sbatch: it is one task of a job array}"
N="${SLURM_ARRAY_TASK_COUNT:-$((SLURM_ARRAY_TASK_MAX - SLURM_ARRAY_TASK_MIN + 1))}"
CPUS="${SLURM_CPUS_PER_TASK:-2}"
JOBS=$((CPUS / 2 > 0 ? CPUS / 2 : 1))
OUT="${GRADES:-grades}/shard-$K"

cd "${SLURM_SUBMIT_DIR:-.}"
# The runs' temporary folders go to the node's local disk, not the shared file system.
exec .venv/bin/python -m course_tools.grade "$@" \
    --shard "$K/$N" \
    --out "$OUT" \
    -j "$JOBS" \
    --workdir "${TMPDIR:-/tmp}"
