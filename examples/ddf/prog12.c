struct node { int value; struct node *next; };
int table[64];
int f0(int n) { int s = 0; for (int j = 0; j < n; j++) s = s + table[j % 64] + 10; return s; }
int f1(int n) { int s = 0; for (int a = 0; a < n; a++) for (int b = 0; b < a; b++) s += (a - b) * (a - b) + 11; return s; }
int f2(int x) { if (x > 12) return x * 1; else if (x < -12) return x * 2; else if (x == 0) return 12; return x - 12; }
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
  if (x > 18) x = x * 5 + 18; else x ^= 21;
  if (x > 19) x = x * 6 + 19; else x ^= 22;
  if (x > 20) x = x * 7 + 20; else x ^= 23;
  if (x > 21) x = x * 1 + 21; else x ^= 24;
  if (x > 22) x = x * 2 + 22; else x ^= 25;
  if (x > 23) x = x * 3 + 23; else x ^= 26;
  if (x > 24) x = x * 4 + 24; else x ^= 27;
  if (x > 25) x = x * 5 + 25; else x ^= 28;
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
