#!/usr/bin/env bash
# GPU smoke run: the checks that need a CUDA device, in one short script (about 4 minutes on one H200).
#
#   bash benchmarks/gpu_smoke.sh            # from the repository root, after `uv sync`
#   GPU_SMOKE_RUN= bash benchmarks/gpu_smoke.sh   # no uv: `mgpu-lab` and `python` on PATH run the project
#
# 1. trains one CUDA rank per library (rsl_rl, rl_games, skrl torch) through the launcher (NCCL); each checkpoint
#    written on the GPU then plays on the GPU and on the CPU, and a CPU run resumes from it (checkpoints travel
#    between a GPU cluster and a laptop); skrl's JAX trains on the GPU through its own launcher;
# 2. runs the NCCL probe with --backend nccl on every visible GPU;
# 3. triggers the hang watchdog once on a CUDA rank (--rehearse_fault hang) and checks exit 3 and the stacks;
# 4. times the rank-side supervision on CUDA (benchmarks/bench_collectives.py --device cuda: the ratios);
# 5. prints throughput GPU vs CPU (the same run with --device cpu), as a ratio.
# Every step has a deadline (timeout); the script goes on after a failed step and exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

RUN=${GPU_SMOKE_RUN-uv run --frozen}   # what runs `mgpu-lab` and `python`; empty: the ones on PATH
STEP_LIMIT=${GPU_SMOKE_STEP_LIMIT:-240}   # seconds per step
LOGS=${GPU_SMOKE_LOGS:-$(mktemp -d -t gpu_smoke_XXXX)}
mkdir -p "$LOGS" || exit 1
ITERS=${GPU_SMOKE_ITERS:-20}
ENVS=${GPU_SMOKE_ENVS:-4096}
failed=0

step() {  # step NAME COMMAND...: run with a deadline, keep the output, report the exit status
  local name=$1; shift
  echo "== $name: $*"
  timeout --kill-after=10 "$STEP_LIMIT" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  echo "   exit $rc ($LOGS/$name.log)"
  tail -n 4 "$LOGS/$name.log" | sed 's/^/   | /'
  return $rc
}

throughput() {  # the env-steps/s figure of a run's log, or 0
  grep -oE 'throughput: [0-9]+ env-steps/s' "$1" | grep -oE '[0-9]+' | tail -n 1 || echo 0
}

nvidia-smi -L || { echo "no NVIDIA GPU visible: nothing to smoke-test"; exit 1; }
ngpu=$(nvidia-smi -L | grep -c '^GPU ')

for lib in rsl_rl rl_games skrl; do
  step "train_$lib" $RUN mgpu-lab train_multigpu --num_gpus 1 --rl_library "$lib" --task Toy-Cartpole-v0 \
      --num_envs "$ENVS" --max_iterations "$ITERS" --log_root "$LOGS/runs" || { failed=1; continue; }
  for dev in cuda cpu; do  # the checkpoint written on the GPU, played on each device
    step "play_${lib}_$dev" $RUN mgpu-lab play --rl_library "$lib" --task Toy-Cartpole-v0 --checkpoint latest \
        --log_root "$LOGS/runs" --device "$dev" --num_envs 64 --num_episodes 20 || failed=1
  done
  # a CPU run resumes from it: twice the iterations in all, counted from 0, so it trains on
  step "resume_${lib}_cpu" $RUN mgpu-lab train_multigpu --num_gpus 1 --device cpu --rl_library "$lib" \
      --task Toy-Cartpole-v0 --num_envs 64 --max_iterations $((2 * ITERS)) --checkpoint latest \
      --log_root "$LOGS/runs" || failed=1
done

step train_skrl_jax $RUN mgpu-lab train_multigpu --num_gpus 1 --rl_library skrl --ml_framework jax \
    --task Toy-Cartpole-v0 --num_envs "$ENVS" --max_iterations "$ITERS" --log_root "$LOGS/jax" || failed=1

step probe_nccl $RUN python -m torch.distributed.run --nproc_per_node "$ngpu" \
    skills/user/train-multi-gpu/scripts/nccl_probe.py --backend nccl -b 8 -e 64M || failed=1

# the watchdog on a CUDA rank: rank 0 stops making progress at iteration 3; expect exit 3 and stack files
step watchdog $RUN mgpu-lab train_multigpu --num_gpus 1 --task Toy-Cartpole-v0 --rehearse_fault hang:0:3 \
    --num_envs 256 --max_iterations 50 --hang_timeout 15 --log_root "$LOGS/hang"
rc=$?
if [ "$rc" -eq 3 ] && ls "$LOGS"/hang/*/*/*/watchdog/stack_rank0.txt >/dev/null 2>&1; then
  echo "   watchdog: exit 3 and stack files present"
else
  echo "   watchdog: expected exit 3 and <run>/watchdog/stack_rank0.txt, got exit $rc"; failed=1
fi

# the rank-side supervision's cost on CUDA (issue 36: DDP step of a small network at most 1.03x the bare one, a
# small all_reduce at most 5 us over it), world size 1 and every visible GPU; printed, never a failure by itself
step supervision_cost $RUN python benchmarks/bench_collectives.py --device cuda --calls 1000 --rounds 6 || failed=1
grep -E '^cuda world' "$LOGS/supervision_cost.log" | sed 's/^/   | /'

step cpu_rsl_rl $RUN mgpu-lab train_multigpu --num_gpus 1 --device cpu --rl_library rsl_rl --task Toy-Cartpole-v0 \
    --num_envs "$ENVS" --max_iterations "$ITERS" --log_root "$LOGS/cpu" || failed=1
# and the other way: the checkpoint written on the CPU plays on the GPU
step play_cpu_checkpoint_cuda $RUN mgpu-lab play --rl_library rsl_rl --task Toy-Cartpole-v0 --checkpoint latest \
    --log_root "$LOGS/cpu" --device cuda --num_envs 64 --num_episodes 20 || failed=1
gpu=$(throughput "$LOGS/train_rsl_rl.log"); cpu=$(throughput "$LOGS/cpu_rsl_rl.log")
python3 - "$gpu" "$cpu" <<'EOF'
import sys
gpu, cpu = (float(x) for x in sys.argv[1:])
ratio = f"{gpu / cpu:.2f}x" if cpu > 0 else "n/a"
print(f"throughput rsl_rl, 1 rank, {sys.argv[1]} vs {sys.argv[2]} env-steps/s: GPU/CPU = {ratio}")
EOF

echo "logs: $LOGS"
exit $failed
