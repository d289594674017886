/* Conformance input: control flow, structs, globals, calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct point { int x, y; };
struct shape { const char *name; struct point corners[4]; int n; };

int counter = 0;
static const char banner[] = "#1 shape report #2 (poison, noundef)";

static int area2(const struct shape *s) {
    int a = 0;
    for (int i = 0; i < s->n; i++) {
        const struct point *p = &s->corners[i], *q = &s->corners[(i + 1) % s->n];
        a += p->x * q->y - q->x * p->y;
    }
    counter++;
    return a < 0 ? -a : a;
}

static const char *classify(int sides) {
    switch (sides) {
    case 0: return "empty";
    case 1: return "point";
    case 2: return "segment";
    case 3: return "triangle";
    case 4: return "quad";
    default: return "polygon";
    }
}

struct point centroid(const struct shape *s) {
    struct point c = {0, 0};
    if (s->n == 0)
        return c;
    for (int i = 0; i < s->n; i++) {
        c.x += s->corners[i].x;
        c.y += s->corners[i].y;
    }
    c.x /= s->n;
    c.y /= s->n;
    return c;
}

int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(int argc, char **argv) {
    struct shape s = {"box", {{0, 0}, {4, 0}, {4, 3}, {0, 3}}, 4};
    if (argc > 1)
        s.n = atoi(argv[1]) & 3;
    struct point c = centroid(&s);
    char buf[64];
    snprintf(buf, sizeof buf, "%s: %s", s.name, classify(s.n));
    int total = 0;
    int i = 0;
    while (i < 10) {
        if (i % 3 == 0) { i++; continue; }
        total += fib(i);
        if (total > 100) break;
        i++;
    }
    do { total -= 7; } while (total > 50);
    printf("%s area2=%d c=(%d,%d) total=%d len=%zu %s\n", buf, area2(&s), c.x, c.y, total, strlen(banner), banner);
    return counter == 1 ? 0 : 1;
}
