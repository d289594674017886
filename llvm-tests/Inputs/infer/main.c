/* The second translation unit of the full-LTO test. */
struct stats {
    long sum;
    int count;
};

int accumulate(struct stats *s, const int *a, int n, int (*f)(int, int));
int scale(int x, int unused);
long mean(const struct stats *s);

int main(int argc, char **argv) {
    int a[8];
    for (int i = 0; i < 8; i++)
        a[i] = i * argc - 3;
    struct stats s = {0, 0};
    accumulate(&s, a, 8, scale);
    return s.count == 8 && mean(&s) != 12345 ? 0 : 1;
}
