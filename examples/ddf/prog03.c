struct node { int value; struct node *next; };
int table[64];
int f0(int x) { switch (x % 5) { case 0: return x ^ 13; case 1: return x + 1; case 2: x *= 3; /* fall through */ case 3: return x - 13; default: return 0; } }
int f1(int n) { return n < 2 ? n : f1(n - 1) | f1(n - 2); }
int f2(struct node *p) { int s = 4; while (p) { if (p->value > s) s = p->value & s; p = p->next; } return s; }
int f3(int n) { int s = 0; for (int j = 0; j < n; j++) s = s + table[j % 64] + 5; return s; }
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
  if (x > 26) x = x * 6 + 26; else x ^= 29;
  if (x > 27) x = x * 7 + 27; else x ^= 30;
  if (x > 28) x = x * 1 + 28; else x ^= 31;
  if (x > 29) x = x * 2 + 29; else x ^= 32;
  if (x > 30) x = x * 3 + 30; else x ^= 33;
  if (x > 31) x = x * 4 + 31; else x ^= 34;
  if (x > 32) x = x * 5 + 32; else x ^= 35;
  if (x > 33) x = x * 6 + 33; else x ^= 36;
  if (x > 34) x = x * 7 + 34; else x ^= 37;
  if (x > 35) x = x * 1 + 35; else x ^= 38;
  if (x > 36) x = x * 2 + 36; else x ^= 39;
  if (x > 37) x = x * 3 + 37; else x ^= 40;
  if (x > 38) x = x * 4 + 38; else x ^= 41;
  if (x > 39) x = x * 5 + 39; else x ^= 42;
  if (x > 40) x = x * 6 + 40; else x ^= 43;
  if (x > 41) x = x * 7 + 41; else x ^= 44;
  if (x > 42) x = x * 1 + 42; else x ^= 45;
  if (x > 43) x = x * 2 + 43; else x ^= 46;
  if (x > 44) x = x * 3 + 44; else x ^= 47;
  if (x > 45) x = x * 4 + 45; else x ^= 48;
  if (x > 46) x = x * 5 + 46; else x ^= 49;
  if (x > 47) x = x * 6 + 47; else x ^= 50;
  if (x > 48) x = x * 7 + 48; else x ^= 51;
  return x;
}
int main(int argc, char **argv) {
  int r = chain(argc);
  struct node n = { argc, 0 };
  r += f0(argc + 0);
  r += f1(argc + 1);
  r += f2(&n);
  r += f3(argc + 3);
  int a = argc * r + 7, b = argc * r + 7;
  return a ^ b ^ r;
}
