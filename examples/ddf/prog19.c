struct node { int value; struct node *next; };
int table[64];
int f0(int n) { int s = 0; for (int a = 0; a < n; a++) for (int b = 0; b < a; b++) s += (a - b) * (a - b) + 4; return s; }
int f1(int x) { if (x > 5) return x * 1; else if (x < -5) return x * 2; else if (x == 0) return 5; return x - 5; }
int f2(int x) { switch (x % 5) { case 0: return x ^ 6; case 1: return x + 1; case 2: x *= 3; /* fall through */ case 3: return x - 6; default: return 0; } }
int f3(int n) { return n < 2 ? n : f3(n - 1) | f3(n - 2); }
int f4(struct node *p) { int s = 8; while (p) { if (p->value > s) s = p->value & s; p = p->next; } return s; }
int chain(int x) {
  return x;
}
int main(int argc, char **argv) {
  int r = chain(argc);
  struct node n = { argc, 0 };
  r += f0(argc + 0);
  r += f1(argc + 1);
  r += f2(argc + 2);
  r += f3(argc + 3);
  r += f4(&n);
  int a = argc * r + 7, b = argc * r + 7;
  return a ^ b ^ r;
}
