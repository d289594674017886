/* Conformance input: function pointers, varargs, unions, recursion, goto. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*binop)(int, int);
static int add(int a, int b) { return a + b; }
static int sub(int a, int b) { return a - b; }
static int mul(int a, int b) { return a * b; }
static binop table[] = {add, sub, mul};

union value { long i; double d; char bytes[8]; };

struct node { int key; struct node *left, *right; };

static struct node *insert(struct node *t, int key) {
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t) abort();
        t->key = key;
        return t;
    }
    if (key < t->key) t->left = insert(t->left, key);
    else t->right = insert(t->right, key);
    return t;
}

static int depth(const struct node *t) {
    if (!t) return 0;
    int l = depth(t->left), r = depth(t->right);
    return 1 + (l > r ? l : r);
}

static void release(struct node *t) {
    if (!t) return;
    release(t->left);
    release(t->right);
    free(t);
}

static int sum(int n, ...) {
    va_list ap;
    va_start(ap, n);
    int s = 0;
    for (int i = 0; i < n; i++) s += va_arg(ap, int);
    va_end(ap);
    return s;
}

static int find(const int *xs, int n, int want) {
    int i = 0;
again:
    if (i >= n) goto missing;
    if (xs[i] == want) return i;
    i++;
    goto again;
missing:
    return -1;
}

int apply(binop f, int a, int b) { return f(a, b); }

int main(void) {
    union value v;
    v.d = 1.5;
    struct node *root = NULL;
    int keys[] = {5, 3, 8, 1, 4, 7, 9, 2, 6};
    for (unsigned i = 0; i < sizeof keys / sizeof *keys; i++) root = insert(root, keys[i]);
    int acc = 0;
    for (int i = 0; i < 3; i++) acc += apply(table[i], acc + 2, i);
    printf("%d %d %d %ld %d\n", depth(root), acc, sum(4, 1, 2, 3, 4), v.i & 0xff, find(keys, 9, 7));
    release(root);
    return 0;
}
