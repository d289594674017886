struct node { int value; struct node *next; };
int table[64];
int f0(int n) { return n < 2 ? n : f0(n - 1) | f0(n - 2); }
int f1(struct node *p) { int s = 4; while (p) { if (p->value > s) s = p->value & s; p = p->next; } return s; }
int f2(int n) { int s = 0; for (int j = 0; j < n; j++) s = s + table[j % 64] + 5; return s; }
int chain(int x) {
  return x;
}
int main(int argc, char **argv) {
  int r = chain(argc);
  struct node n = { argc, 0 };
  r += f0(argc + 0);
  r += f1(&n);
  r += f2(argc + 2);
  int a = argc * r + 7, b = argc * r + 7;
  return a ^ b ^ r;
}
