/* Short circuits, ternaries, recursion, structs, common subexpressions
 * (tests/analysis.rs). */
struct point { int x, y; };

static int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }

int in_box(struct point p, struct point lo, struct point hi) {
  return p.x >= lo.x && p.x <= hi.x && (p.y >= lo.y || p.y == -1) && !(p.y > hi.y);
}

int common(int a, int b, int c) {
  int t1 = a * b + c;
  int t2 = b * a + c;
  int t3 = (a + b) * (a + b);
  int t4 = (a - b) * (b - a);
  if (t1 > t2)
    t3 += a * b;
  else
    t4 -= a * b;
  return t1 + t2 + t3 + t4 + gcd(a, c);
}

unsigned hash(const char *s) {
  unsigned h = 2166136261u;
  while (*s) {
    h ^= (unsigned char)*s++;
    h *= 16777619u;
    if (h == 0)
      h = 1;
  }
  return h;
}

int ackermann(int m, int n) {
  if (m == 0)
    return n + 1;
  if (n == 0)
    return ackermann(m - 1, 1);
  return ackermann(m - 1, ackermann(m, n - 1));
}

double poly(double x, const double *c, int n) {
  double r = 0;
  for (int i = n - 1; i >= 0; i--)
    r = r * x + c[i];
  return r != r ? 0.0 : r;
}

int partition(int *a, int lo, int hi) {
  int p = a[hi], i = lo - 1;
  for (int j = lo; j < hi; j++)
    if (a[j] <= p) {
      i++;
      int t = a[i]; a[i] = a[j]; a[j] = t;
    }
  int t = a[i + 1]; a[i + 1] = a[hi]; a[hi] = t;
  return i + 1;
}

void quicksort(int *a, int lo, int hi) {
  while (lo < hi) {
    int p = partition(a, lo, hi);
    if (p - lo < hi - p) {
      quicksort(a, lo, p - 1);
      lo = p + 1;
    } else {
      quicksort(a, p + 1, hi);
      hi = p - 1;
    }
  }
}
