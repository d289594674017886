struct node { int value; struct node *next; };
int table[64];
int f0(int x) { if (x > 11) return x * 1; else if (x < -11) return x * 2; else if (x == 0) return 11; return x - 11; }
int chain(int x) {
  return x;
}
int main(int argc, char **argv) {
  int r = chain(argc);
  struct node n = { argc, 0 };
  r += f0(argc + 0);
  int a = argc * r + 7, b = argc * r + 7;
  return a ^ b ^ r;
}
