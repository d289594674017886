#include <stdio.h>

#include "stats.h"

int main(void) {
  double xs[] = {1, 2, 3, 4};
  printf("%g\n", mean(xs, 4));
  return 0;
}
