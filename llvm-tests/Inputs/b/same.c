int from_b(int x) { return x - 1; }
