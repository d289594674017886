int from_a(int x) { return x + 1; }
