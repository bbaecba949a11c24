/** The `--html` page's script (`ts/report/page/`): its functions are put into the page by their
 * source, so each must stand alone there. Checked as tsx compiles the sources (these tests) and
 * as tsc compiled them into dist/ (the page `npm run build` ships). */
import test, { type ExecutionContext } from 'ava'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import ts from 'typescript'
import * as fromSources from '../ts/report/page/script'

type PageScript = typeof fromSources

const root = join(__dirname, '..')
const DIST_SCRIPT = join(root, 'dist', 'report', 'page', 'script.js')

/** The page's script as tsx compiled it, and as tsc compiled it into dist/. */
function builds(t: ExecutionContext): [string, PageScript][] {
  if (!existsSync(DIST_SCRIPT)) {
    t.fail(`${DIST_SCRIPT} is needed: npm run build (or npx tsc -p tsconfig.build.json)`)
    return [['ts/ through tsx', fromSources]]
  }
  return [
    ['ts/ through tsx', fromSources],
    ['dist/ from tsc', require(DIST_SCRIPT) as PageScript],
  ]
}

// How compiled modules refer to bindings of modules: tsc's `module_1.fn` and `exports.x`,
// esbuild's `import_module.fn`, and `require(`.
const MODULE_REFERENCE = /\b[A-Za-z_$][\w$]*_\d+\.|\bimport_[\w$]+\.|\bexports\.|\bmodule\.exports\b|\brequire\(/

test('no page function refers to a module binding: the page has no modules', (t) => {
  const found: string[] = []
  for (const [build, script] of builds(t)) {
    t.true(script.PAGE_FUNCTIONS.length > 0, build)
    for (const f of script.PAGE_FUNCTIONS) {
      const reference = MODULE_REFERENCE.exec(f.toString())
      if (reference) found.push(`${build}: ${f.name} refers to ${reference[0]}`)
    }
  }
  t.deepEqual(found, [])
})

test('every page function is a named function declaration, and no two share a name: each defines its name in the page once', (t) => {
  for (const [build, script] of builds(t)) {
    const names = script.PAGE_FUNCTIONS.map((f) => f.name)
    const notDeclarations = script.PAGE_FUNCTIONS.filter((f) => !new RegExp(`^(async )?function ${f.name}\\(`).test(f.toString())).map((f) => f.name || f.toString().slice(0, 40))
    t.deepEqual(notDeclarations, [], build)
    t.deepEqual(
      names.filter((n, i) => names.indexOf(n) !== i),
      [],
      build,
    )
  }
})

/** The names `script` uses that it does not define and the browser does not have, as
 * "function: message", by TypeScript's checker with only the browser's libraries. */
function undefinedNames(script: string): string[] {
  const options: ts.CompilerOptions = { allowJs: true, checkJs: true, noEmit: true, target: ts.ScriptTarget.ES2022, lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'], types: [] }
  const fileName = join(root, 'page-script.js')
  const source = ts.createSourceFile(fileName, script, ts.ScriptTarget.ES2022, true, ts.ScriptKind.JS)
  const host = ts.createCompilerHost(options)
  const readLib = host.getSourceFile.bind(host)
  host.getSourceFile = (name, ...rest) => (name === fileName ? source : readLib(name, ...rest))
  const program = ts.createProgram([fileName], options, host)
  const within = (at: number): string => {
    const statement = source.statements.find((s) => s.getStart() <= at && at < s.end)
    return statement && ts.isFunctionDeclaration(statement) && statement.name ? statement.name.text : 'the script'
  }
  return program
    .getSemanticDiagnostics(source)
    .map((d) => [d.start ?? 0, ts.flattenDiagnosticMessageText(d.messageText, ' ')] as const)
    .filter(([, message]) => message.startsWith('Cannot find name'))
    .map(([at, message]) => `${within(at)}: ${message}`)
}

test('every function a page function calls by name, and every other name it reads, is defined in the page script or by the browser', (t) => {
  for (const [build, script] of builds(t)) {
    t.true(script.PAGE_SCRIPT.includes('function cudaArenaReport('), build)
    t.deepEqual(undefinedNames(script.PAGE_SCRIPT), [], build)
  }
})

test("the name check reports a call of a function the page script lacks, and a module binding's name", (t) => {
  const script = 'function shown(n) { return String(n) }\nfunction caller(n) { return shown(n) + missing(n) + (0, format_1.fmtInt)(n) }'
  t.deepEqual(undefinedNames(script), ["caller: Cannot find name 'missing'.", "caller: Cannot find name 'format_1'."])
})
