struct node { int value; struct node *next; };
int table[64];
int f0(int n) { int s = 0; for (int a = 0; a < n; a++) for (int b = 0; b < a; b++) s += (a - b) * (a - b) + 10; return s; }
int f1(int x) { if (x > 11) return x * 1; else if (x < -11) return x * 2; else if (x == 0) return 11; return x - 11; }
int chain(int x) {
  return x;
}
int main(int argc, char **argv) {
  int r = chain(argc);
  struct node n = { argc, 0 };
  r += f0(argc + 0);
  r += f1(argc + 1);
  int a = argc * r + 7, b = argc * r + 7;
  return a ^ b ^ r;
}
