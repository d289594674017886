struct node { int value; struct node *next; };
int table[64];
int f0(int x) { if (x > 6) return x * 1; else if (x < -6) return x * 2; else if (x == 0) return 6; return x - 6; }
int f1(int x) { switch (x % 5) { case 0: return x ^ 7; case 1: return x + 1; case 2: x *= 3; /* fall through */ case 3: return x - 7; default: return 0; } }
int f2(int n) { return n < 2 ? n : f2(n - 1) | f2(n - 2); }
int chain(int x) {
  return x;
}
int main(int argc, char **argv) {
  int r = chain(argc);
  struct node n = { argc, 0 };
  r += f0(argc + 0);
  r += f1(argc + 1);
  r += f2(argc + 2);
  int a = argc * r + 7, b = argc * r + 7;
  return a ^ b ^ r;
}
