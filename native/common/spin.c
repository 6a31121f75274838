/* Spin-waits: how a waiting worker polls (sl.h). Measured on a Granite Rapids guest
 * (docs/runs/2026-12-05-gnr-kvm-layer-vs-original.md, native/wakeup): the first 512-bit phase
 * after a few us without 512-bit FP work runs ~3x slower while the unit wakes up, and the
 * first AMX product after a pause in AMX work likewise. With barrier-coupled workers one
 * worker's slow phase is the others' wait, which lets their units sleep in turn: the penalty
 * passes back and forth for up to ~1 ms after one disturbance. So a poll can keep the unit the
 * workers compute on busy: fma512 adds one 512-bit FMA per poll, amx also the caller's tile
 * product every 8th poll (fewer let the bursts back; more delay the wake-up of a 5 us step).
 * Each worker then pays at most one slow phase per disturbance. */
#include "sl.h"

#include <immintrin.h>

const char* const sl_spin_names[] = { "pause", "fma512", "amx", NULL };

static int spin_mode = SL_SPIN_PAUSE;
static void (*spin_tick)(void);

void sl_spin_set(int mode, void (*amx_tick)(void))
{
    spin_mode = mode;
    spin_tick = amx_tick;
}

void sl_parse_spin(const char* flag, const char* text, void* dest)
{
    static const char* const args[] = { "auto", "pause", "fma512", "amx", NULL };
    *(int*)dest = sl_parse_choice(flag, text, args) - 1;
}

int sl_spin_resolve(int requested, int automatic, bool real_amx, const char* amx_kernel)
{
    const char* why = "";
    const bool have512 = sl_have_avx512(&why);
    if (requested == SL_SPIN_AMX && !amx_kernel)
        sl_usage_error("--spin amx: %s has no AMX kernel (amx keeps the TMUL awake)", sl_prog);
    if (requested == SL_SPIN_AMX && !real_amx)
        sl_usage_error(
            "--spin amx: only with %s on real AMX (it keeps the TMUL awake)", amx_kernel);
    if (requested >= SL_SPIN_FMA512 && !have512)
        sl_unsupported("--spin %s: %s", sl_spin_names[requested], why);
    if (requested >= 0)
        return requested;
    return have512 && (automatic != SL_SPIN_AMX || real_amx) ? automatic : SL_SPIN_PAUSE;
}

static _Thread_local float spin_acc[16] __attribute__((aligned(64)));
static _Thread_local unsigned spin_polls;

/* a -> a/2 + 1/4: stays at 1/2, never denormal; in memory, so no vector register is live in
 * the callers */
static SL_TARGET_AVX512 __attribute__((noinline)) void spin_fma512(void)
{
    const __m512 a = _mm512_load_ps(spin_acc);
    _mm512_store_ps(spin_acc, _mm512_fmadd_ps(a, _mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f)));
}

void sl_spin_relax(void)
{
    if (spin_mode != SL_SPIN_PAUSE) {
        spin_fma512();
        if (spin_mode == SL_SPIN_AMX && spin_tick && (++spin_polls & 7) == 0)
            spin_tick();
    }
    _mm_pause();
}

void sl_spin_until(const volatile uint64_t* p, uint64_t target)
{
    while (__atomic_load_n(p, __ATOMIC_ACQUIRE) < target)
        sl_spin_relax();
}
