struct node { int value; struct node *next; };
int table[64];
int f0(int n) { int s = 0; for (int j = 0; j < n; j++) s = s + table[j % 64] + 12; return s; }
int f1(int n) { int s = 0; for (int a = 0; a < n; a++) for (int b = 0; b < a; b++) s += (a - b) * (a - b) + 13; return s; }
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
  if (x > 10) x = x * 4 + 10; else x ^= 13;
  if (x > 11) x = x * 5 + 11; else x ^= 14;
  if (x > 12) x = x * 6 + 12; else x ^= 15;
  if (x > 13) x = x * 7 + 13; else x ^= 16;
  if (x > 14) x = x * 1 + 14; else x ^= 17;
  if (x > 15) x = x * 2 + 15; else x ^= 18;
  if (x > 16) x = x * 3 + 16; else x ^= 19;
  if (x > 17) x = x * 4 + 17; else x ^= 20;
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
