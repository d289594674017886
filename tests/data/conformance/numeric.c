/* Conformance input: floating point, integer kinds, select, switch on
   ranges, 2-D arrays, string handling, unreachable code. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <ctype.h>

#define N 8
double grid[N][N];

static unsigned long long hash(const char *s) {
    unsigned long long h = 1469598103934665603ULL;
    while (*s) { h ^= (unsigned char)*s++; h *= 1099511628211ULL; }
    return h;
}

static double norm(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i] * v[i];
    return sqrt(s);
}

static int grade(int score) {
    switch (score / 10) {
    case 10: case 9: return 'A';
    case 8: return 'B';
    case 7: return 'C';
    case 6: return 'D';
    default: return 'F';
    }
}

static void matmul(double a[N][N], double b[N][N], double c[N][N]) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < N; k++) s += a[i][k] * b[k][j];
            c[i][j] = s;
        }
}

static int count_words(const char *s) {
    int words = 0, in = 0;
    for (; *s; s++) {
        if (isspace((unsigned char)*s)) in = 0;
        else if (!in) { in = 1; words++; }
    }
    return words;
}

static int sign(int x) {
    if (x > 0) return 1;
    if (x < 0) return -1;
    if (x == 0) return 0;
    __builtin_unreachable();
}

int main(void) {
    static double b[N][N], c[N][N];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) { grid[i][j] = i + j * 0.5; b[i][j] = i == j; }
    matmul(grid, b, c);
    char text[] = "the quick brown fox";
    short sh = (short)hash(text);
    float f = (float)norm(c[1], N);
    long double ld = f / 3.0L;
    unsigned char uc = (unsigned char)(sh >> 3);
    printf("%c %d %llu %f %Lf %u %d %d\n", grade(87), count_words(text), hash("programl"), f, ld, uc,
           sign(sh), fmax(f, 2.0) > 2.0 ? 1 : 0);
    return strcmp(text, "x") > 0 ? 0 : 1;
}
