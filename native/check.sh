#!/bin/sh
# make check: every binary at tiny sizes with its self-check; seconds in total.
# AMX kernels must either pass (CPU has AMX) or exit 3 (CPU lacks it); the AMX path is always
# checked under the software tile emulation (amx_emu_test), and the tile config the real AMX
# objects load is checked on every x86 host (tilecfg_check: decoded at the faulting LDTILECFG
# without AMX, read back with STTILECFG with it).
set -u
B=${1:?usage: check.sh BUILD_DIR}
fail=0
has() { grep -qw "$1" /proc/cpuinfo 2>/dev/null; }
# expected exit code per ISA: 0 where the CPU has it, 3 (unsupported) where it does not
rc_for() { for f in "$@"; do has "$f" || { echo 3; return; }; done; echo 0; }
avx2=$(rc_for avx2)
avx512=$(rc_for avx512f avx512bw)
bf16=$(rc_for avx512f avx512bw avx512_bf16)
amx_rc=$(rc_for amx_tile amx_bf16)
# the host's branch, in one line: 0 = must run and pass here, 3 = must say unsupported
echo "host: avx2 $avx2, avx512 $avx512, avx512-bf16 $bf16, amx $amx_rc, waitpkg $(rc_for waitpkg)"

run() { # expected-rc description command...
    want=$1; shift
    out=$("$@" 2>&1 >/dev/null)
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL (rc=$rc, want $want): $*"
        [ -n "$out" ] && echo "    $out"
        fail=1
    else
        echo "ok   $*"
    fi
}

T="--timeout 60"
run $avx512 $B/ladder --kernel avx512-read --size 16K --seconds 0.02 --reps 2 $T
run $avx2 $B/ladder --kernel avx2-read --size 64K --seconds 0.02 --reps 1 --page thp $T
run $bf16 $B/ladder --kernel avx512-bf16-gemv --size 256K --seconds 0.02 --reps 1 $T
run $amx_rc $B/ladder --kernel amx-bf16-stream --size 64K --seconds 0.02 --reps 1 $T
run $bf16 $B/ladder --kernel avx512-bf16-compute --seconds 0.02 --reps 2 $T
run $amx_rc $B/ladder --kernel amx-bf16-compute --seconds 0.02 --reps 1 $T
for k in avx512-bf16 avx512-bf16-rows avx512-fp32; do
    want=$bf16
    [ $k = avx512-fp32 ] && want=$avx512
    for b in 1 4 16; do
        run $want $B/gemv --kernel $k --rows 72 --cols 256 --batch $b --steps 20 --warmup 2 $T
    done
done
run $amx_rc $B/gemv --kernel amx-bf16 --rows 72 --cols 256 --batch 4 --steps 20 --warmup 2 $T
for b in 1 3 16; do
    run $avx2 $B/gemv --kernel avx2-bf16 --rows 72 --cols 256 --batch $b --steps 20 --warmup 2 $T
done
# the AVX-512 kernels on SIMDe (test-only; built where libsimde-dev is installed): on every host
if [ -x $B/gemv_avx512_emu ]; then
    for k in avx512-bf16 avx512-bf16-rows avx512-fp32; do
        run 0 $B/gemv_avx512_emu --kernel $k --rows 72 --cols 256 --batch 5 --steps 2 --warmup 1 $T
    done
    run 0 $B/layer_avx512_emu --help
else
    echo "skip gemv_avx512_emu: not built (needs libsimde-dev, scripts/system-deps.sh)"
fi
# the layer partition is arithmetic only: it runs on every host, AMX or not
run 0 $B/gemv --kernel amx-bf16 --layer 2048x1536,256x1536,1536x2048 --workers 90
run $avx512 $B/kvstream --tokens 300 --heads 2 --head-dim 64 --tile-kib 2 --steps 5 --warmup 1 $T
# residency: the host's best read kernel (avx2 at least) under A and C, AMX only where it exists;
# --lock without the pseudo-lock driver must say unsupported (exit 3)
run $avx2 $B/residency --slice 64K --steps 50 --scenario A $T
run $avx2 $B/residency --slice 64K --steps 20 --scenario C --kv-bytes 4M --kv-step 64K $T
run $amx_rc $B/residency --slice 64K --steps 5 --kernel amx --no-held $T
run 3 $B/residency --slice 64K --lock --device /nonexistent/pseudo_lock
run 2 $B/residency --slice 1000
# exchange needs two CPUs; use the first two online ones
cpus=$(awk -F'[-,]' '{print $1 "," ($2 == "" ? $1 : $2)}' /sys/devices/system/cpu/online)
if [ "${cpus%,*}" != "${cpus#*,}" ]; then
    for m in diss fid fid-cld hier; do
        run 0 $B/exchange --mode $m --cpus $cpus --iters 200 --warmup 20 $T
    done
    run 0 $B/exchange --mode hier --cpus $cpus --groups "${cpus%,*}/${cpus#*,}" --iters 200 --warmup 20 $T
    run $(rc_for waitpkg) $B/exchange --mode hier-umwait --cpus $cpus --iters 200 --warmup 20 $T
    run $avx2 $B/exchange --mode rep --cpus $cpus --iters 200 --warmup 20 $T
    run 0 $B/exchange --mode pingpong --cpus $cpus --iters 20 --warmup 2 --roundtrips 20 $T
    # wakeup: coupled workers, both spins where AVX-512 runs; scalar work runs everywhere
    run $avx512 $B/wakeup --cpus $cpus --steps 300 --spin fma512 $T
    run $bf16 $B/wakeup --cpus $cpus --steps 300 --work zmm-dpbf16 --gap-us 5 $T
    run 0 $B/wakeup --cpus $cpus --steps 300 --work scalar $T
    run 2 $B/wakeup --cpus ${cpus%,*} --steps 300 --work scalar
else
    echo "skip exchange: needs two online CPUs, have $(cat /sys/devices/system/cpu/online)"
fi
run 0 $B/amx_emu_test
# layer: its gate runs in tests/test_layer_stage.py (needs a generated dump); here the CLI only
run 0 $B/layer --help
run 0 $B/layer_amx_emu --help
run 2 $B/layer --xchg direct
run 2 $B/layer --dump /nonexistent
run 0 $B/tilecfg_check
# usage errors: one line, exit 2
run 2 $B/ladder --kernel nope --size 1M
run 2 $B/ladder --kernel avx512-read --size 0
run 2 $B/gemv --kernel avx512-bf16 --cols 100
exit $fail
