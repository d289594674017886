/* Nested loops, break/continue, early returns (tests/analysis.rs). */
int sum_positive_prefix(const int *a, int n, int limit) {
  int s = 0;
  for (int i = 0; i < n; i++) {
    if (a[i] < 0)
      continue;
    if (a[i] > limit)
      break;
    s += a[i];
  }
  return s;
}

int find2d(int m[8][8], int rows, int cols, int key, int *r, int *c) {
  for (int i = 0; i < rows; i++) {
    for (int j = 0; j < cols; j++) {
      if (m[i][j] == key) {
        *r = i;
        *c = j;
        return 1;
      }
      if (m[i][j] < 0)
        goto next_row;
    }
  next_row:;
  }
  return 0;
}

void bubble(int *a, int n) {
  int swapped;
  do {
    swapped = 0;
    for (int i = 1; i < n; i++) {
      if (a[i - 1] > a[i]) {
        int t = a[i];
        a[i] = a[i - 1];
        a[i - 1] = t;
        swapped = 1;
      }
    }
    n--;
  } while (swapped && n > 1);
}

long collatz_steps(long x) {
  long steps = 0;
  while (x != 1) {
    if (x <= 0)
      return -1;
    x = (x % 2) ? 3 * x + 1 : x / 2;
    steps++;
    if (steps > 100000)
      break;
  }
  return steps;
}

int matmul_trace(int n, const double *a, const double *b, double *out) {
  if (n <= 0)
    return 0;
  double tr = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      double acc = 0;
      for (int k = 0; k < n; k++) {
        if (a[i * n + k] == 0)
          continue;
        acc += a[i * n + k] * b[k * n + j];
      }
      out[i * n + j] = acc;
      if (i == j)
        tr += acc;
    }
  return tr > 0 ? 1 : (tr < 0 ? -1 : 0);
}

int dead_code(int x) {
  while (1) {
    if (x > 10)
      return x;
    x += 3;
  }
  x = x * 2; /* unreachable */
  return x;
}
