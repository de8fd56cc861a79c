/* `numallm tokenize` alone, so the tokenizer tests can run it without the rest of the launcher. */
#include "cmd_tokenize.h"

int main(int argc, char **argv) { return cmd_tokenize(argc, argv); }
