/* The demo program of scripts/demo.sh: small, but with the shapes a program
   graph shows (loops, a switch, a struct, calls, a global and a function
   pointer). */
#include <stdio.h>
#include <string.h>

struct account {
    const char *owner;
    long balance;
    int transactions;
};

/* A global, read and written by several functions. */
static long total_fees = 0;

typedef long (*fee_rule)(long amount);

static long flat_fee(long amount) { return amount > 0 ? 1 : 0; }
static long percent_fee(long amount) { return amount / 100; }

static long apply(struct account *a, long amount, fee_rule rule) {
    long fee = rule(amount);          /* indirect call */
    total_fees += fee;
    a->balance += amount - fee;
    a->transactions++;
    return fee;
}

static const char *describe(long balance) {
    switch (balance / 1000) {
    case 0: return "small";
    case 1:
    case 2: return "medium";
    case 3: return "large";
    default: return balance < 0 ? "overdrawn" : "huge";
    }
}

int main(int argc, char **argv) {
    struct account acct = {argc > 1 ? argv[1] : "world", 0, 0};
    fee_rule rules[2] = {flat_fee, percent_fee};
    for (int day = 1; day <= 30; day++) {
        long amount = (day % 7 == 0) ? -250 : 40 * day;
        apply(&acct, amount, rules[day % 2]);
        if (acct.balance > 5000)
            break;
    }
    int vowels = 0;
    for (size_t i = 0; i < strlen(acct.owner); i++)
        if (strchr("aeiou", acct.owner[i]))
            vowels++;
    printf("hello, %s: %ld (%s) after %d transactions, %ld in fees, %d vowels\n", acct.owner,
           acct.balance, describe(acct.balance), acct.transactions, total_fees, vowels);
    return 0;
}
