double mean(const double *xs, int n);
