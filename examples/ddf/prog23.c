struct node { int value; struct node *next; };
int table[64];
int f0(struct node *p) { int s = 10; while (p) { if (p->value > s) s = p->value & s; p = p->next; } return s; }
int f1(int n) { int s = 0; for (int j = 0; j < n; j++) s = s + table[j % 64] + 11; return s; }
int f2(int n) { int s = 0; for (int a = 0; a < n; a++) for (int b = 0; b < a; b++) s += (a - b) * (a - b) + 12; return s; }
int f3(int x) { if (x > 13) return x * 1; else if (x < -13) return x * 2; else if (x == 0) return 13; return x - 13; }
int chain(int x) {
  return x;
}
int main(int argc, char **argv) {
  int r = chain(argc);
  struct node n = { argc, 0 };
  r += f0(&n);
  r += f1(argc + 1);
  r += f2(argc + 2);
  r += f3(argc + 3);
  int a = argc * r + 7, b = argc * r + 7;
  return a ^ b ^ r;
}
