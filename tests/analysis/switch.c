/* Switches with fallthrough, a state machine, and goto (tests/analysis.rs). */
#include <stddef.h>

int classify(int c) {
  switch (c) {
  case ' ':
  case '\t':
  case '\n':
    return 0;
  case '0': case '1': case '2': case '3': case '4':
  case '5': case '6': case '7': case '8': case '9':
    return 1;
  case '+':
    c = '-';
    /* fallthrough */
  case '-':
    return c == '-' ? 2 : 3;
  default:
    if (c >= 'a' && c <= 'z')
      return 4;
    break;
  }
  return -1;
}

/* A tiny stack-machine interpreter: a big switch in a loop. */
long run(const unsigned char *code, size_t len, long *stack) {
  size_t pc = 0;
  int sp = 0;
  for (;;) {
    if (pc >= len)
      goto done;
    unsigned char op = code[pc++];
    switch (op) {
    case 0:
      goto done;
    case 1:
      stack[sp++] = code[pc++];
      break;
    case 2:
      if (sp < 2)
        goto error;
      sp--;
      stack[sp - 1] += stack[sp];
      break;
    case 3:
      if (sp < 2)
        goto error;
      sp--;
      stack[sp - 1] *= stack[sp];
      break;
    case 4:
      if (sp < 1)
        goto error;
      if (stack[sp - 1] == 0)
        pc = code[pc];
      else
        pc++;
      break;
    case 5:
      pc = code[pc];
      continue;
    default:
      goto error;
    }
  }
done:
  return sp > 0 ? stack[sp - 1] : 0;
error:
  return -1;
}

/* Irreducible control flow: two entries into one cycle. */
int irreducible(int a, int b) {
  int x = 0;
  if (a)
    goto left;
  else
    goto right;
left:
  x += 1;
  if (x > b)
    return x;
right:
  x += 2;
  if (x < 100)
    goto left;
  return x;
}

int nested_switch(int a, int b) {
  int r = 0;
  switch (a) {
  case 0:
    switch (b) {
    case 0: r = 1; break;
    case 1: r = 2; /* fallthrough */
    case 2: r += 3; break;
    default: return -1;
    }
    break;
  case 1:
    for (int i = 0; i < b; i++) {
      switch (i & 3) {
      case 0: continue;
      case 1: r += i; break;
      case 2: if (r > 50) goto out; break;
      default: r -= 1;
      }
      r ^= i;
    }
  out:
    break;
  default:
    r = a * b;
  }
  return r;
}
