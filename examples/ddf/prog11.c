struct node { int value; struct node *next; };
int table[64];
int f0(struct node *p) { int s = 3; while (p) { if (p->value > s) s = p->value & s; p = p->next; } return s; }
int f1(int n) { int s = 0; for (int j = 0; j < n; j++) s = s + table[j % 64] + 4; return s; }
int chain(int x) {
  return x;
}
int main(int argc, char **argv) {
  int r = chain(argc);
  struct node n = { argc, 0 };
  r += f0(&n);
  r += f1(argc + 1);
  int a = argc * r + 7, b = argc * r + 7;
  return a ^ b ^ r;
}
