struct node { int value; struct node *next; };
int table[64];
int f0(int n) { int s = 0; for (int j = 0; j < n; j++) s = s + table[j % 64] + 3; return s; }
int chain(int x) {
  if (x > 0) x = x * 1 + 0; else x ^= 3;
  if (x > 1) x = x * 2 + 1; else x ^= 4;
  if (x > 2) x = x * 3 + 2; else x ^= 5;
  if (x > 3) x = x * 4 + 3; else x ^= 6;
  if (x > 4) x = x * 5 + 4; else x ^= 7;
  if (x > 5) x = x * 6 + 5; else x ^= 8;
  if (x > 6) x = x * 7 + 6; else x ^= 9;
  if (x > 7) x = x * 1 + 7; else x ^= 10;
  if (x > 8) x = x * 2 + 8; else x ^= 11;
  if (x > 9) x = x * 3 + 9; else x ^= 12;
  return x;
}
int main(int argc, char **argv) {
  int r = chain(argc);
  struct node n = { argc, 0 };
  r += f0(argc + 0);
  int a = argc * r + 7, b = argc * r + 7;
  return a ^ b ^ r;
}
