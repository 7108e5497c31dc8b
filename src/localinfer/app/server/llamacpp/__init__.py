"""llama.cpp's native routes, in llama-server's shapes: /completion, /infill, /tokenize, /detokenize, /props..."""
