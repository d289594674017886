/* Conformance input: atomics (cmpxchg, atomicrmw with align), inline asm,
   struct return (sret) and byval, vectors, bit fields, static locals. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

_Atomic int hits;
static int plain;

struct big { long a[8]; };
struct flags { unsigned ready : 1, mode : 3, count : 12; };

typedef float v4 __attribute__((vector_size(16)));

struct big make_big(long seed) {
    struct big b;
    for (int i = 0; i < 8; i++) b.a[i] = seed * i;
    return b;
}

long sum_big(struct big b) {
    long s = 0;
    for (int i = 0; i < 8; i++) s += b.a[i];
    return s;
}

int bump(void) {
    atomic_fetch_add(&hits, 2);
    int expected = 0;
    atomic_compare_exchange_strong(&hits, &expected, 5);
    __atomic_fetch_or(&plain, 4, __ATOMIC_RELAXED);
    return atomic_load(&hits);
}

uint64_t cycles(void) {
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

int in_memory(int x) {
    int y = x;
    __asm__("" : "+m"(y));
    return y;
}

v4 scale(v4 v, float k) { return v * k + (v4){1, 2, 3, 4}; }

int counter(void) {
    static int calls;
    return ++calls;
}

int pack(int r, int m) {
    struct flags f;
    memset(&f, 0, sizeof f);
    f.ready = r;
    f.mode = m;
    f.count = r + m;
    return f.count + f.mode;
}

int main(void) {
    v4 v = scale((v4){1, 1, 1, 1}, 2.0f);
    return (int)(sum_big(make_big(3)) + bump() + (cycles() & 1) + in_memory(2) + counter() + pack(1, 5) + (int)v[2]);
}
