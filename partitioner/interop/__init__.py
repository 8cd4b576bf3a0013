"""Other tools' formats: exports a plan to torch's own (the reference partitioner's aot mapping, a
pipelining split spec), Hugging Face Accelerate device maps both ways, and the readers of the
node-latency files both front ends take."""
