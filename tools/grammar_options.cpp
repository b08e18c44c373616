// grammar_options.cpp — the grammar flags shared by `kvrun -p` and `kvrun batch`.
#include <CLI/CLI.hpp>

#include "commands.h"

namespace kvrun::tools {

void add_grammar_options(CLI::App& app, GrammarSource& g) {
  app.add_option("--grammar", g.grammar, "constrain the output to this GBNF grammar (text)");
  app.add_option("--grammar-file", g.grammar_file, "constrain the output to a GBNF grammar file");
  app.add_option("--json-schema", g.json_schema,
                 "constrain the output to JSON valid against this JSON Schema (text)");
  app.add_option("--json-schema-file", g.json_schema_file,
                 "constrain the output to JSON valid against a JSON Schema file");
}

}  // namespace kvrun::tools
