// An OpenCL kernel and a helper it calls: device mapping annotates the
// kernel only.
float scale(float a, float x) { return a * x; }

__kernel void saxpy(__global float *y, __global const float *x, float a, int n) {
  int i = get_global_id(0);
  if (i < n)
    y[i] = scale(a, x[i]) + y[i];
}
