/* Input of the learned pass's lit tests: loops, branches, calls, a
   function pointer, arguments with and without uses. */
struct stats {
    long sum;
    int count;
};

static int clamp(int x, int lo, int hi) {
    if (x < lo)
        return lo;
    if (x > hi)
        return hi;
    return x;
}

int scale(int x, int unused) { return 3 * x + 1; }

int accumulate(struct stats *s, const int *a, int n, int (*f)(int, int)) {
    for (int i = 0; i < n; i++) {
        int v = clamp(f(a[i], i), -100, 100);
        if (v % 2 == 0)
            s->sum += v;
        else
            s->sum -= v;
        s->count++;
    }
    return s->count;
}

long mean(const struct stats *s) { return s->count ? s->sum / s->count : 0; }
