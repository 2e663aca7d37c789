// Lint: typescript-eslint's type-aware recommended rules on the code that ships and the tools
// (src, scripts, bench, web), its plain recommended rules on tests (whose `inject().json()`
// answers are `any` by design), no `any` outside tests, and the layering of
// docs/architecture.md: an import may only point down the layers, and no module may import
// itself back through others (no cycles; type-only cycles too, which import-x skips, are
// dependency-cruiser's: .dependency-cruiser.cjs, also run by `npm run lint`). No floating
// promise in src/: every background task handles its own failure (a `void` does not count).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import importX from 'eslint-plugin-import-x';

const TYPE_CHECKED = ['src/**/*.ts', 'scripts/**/*.ts', 'bench/**/*.ts', 'web/src/**/*.ts'];

// Bottom to top (docs/architecture.md). A module may import its own layer and those below.
const LAYERS = [
  [
    'src/config.ts',
    'src/config-env.ts',
    'src/config-verify.ts',
    'src/paths.ts',
    'src/keys.ts',
    'src/points-value.ts',
    'src/validation',
    'src/generated',
    'src/ledger-format',
    'src/whole-number.ts',
  ],
  ['src/db'],
  ['src/repositories'],
  ['src/nodes'],
  ['src/results'],
  ['src/jobs'],
  ['src/verify'],
  ['src/ledger'],
  ['src/usage', 'src/retention'],
  ['src/auth', 'src/import'],
  ['src/service.ts'],
  ['src/http'],
  ['src/routes'],
  ['src/app.ts'],
  ['src/server.ts'],
  ['src/worker', 'src/ledger-client'],
  ['src/cli'],
];
const zones = LAYERS.slice(0, -1).flatMap((layer, i) =>
  layer.map((target) => ({
    target: `./${target}`,
    from: LAYERS.slice(i + 1)
      .flat()
      .map((p) => `./${p}`),
    message: 'imports point down the layers only (docs/architecture.md)',
  })),
);
// Peers that must not know each other either; the worker and the ledger's client are clients of
// the service's wire only, and know nothing of the server: every layer above the base.
const SERVER = [
  './src/db',
  './src/repositories',
  './src/results',
  './src/jobs',
  './src/nodes',
  './src/verify',
  './src/ledger',
  './src/usage',
  './src/retention',
  './src/auth',
  './src/import',
  './src/service.ts',
  './src/http',
  './src/routes',
  './src/app.ts',
  './src/server.ts',
];
zones.push(
  { target: './src/worker', from: SERVER, message: 'the worker speaks to the coordinator over HTTP only (docs/architecture.md)' },
  {
    target: './src/ledger-client',
    from: [...SERVER, './src/worker'],
    message: 'ins ledger verify --server checks the service over HTTP only (docs/architecture.md)',
  },
  { target: './src/auth', from: ['./src/import'], message: 'auth and import are independent (docs/architecture.md)' },
  { target: './src/import', from: ['./src/auth'], message: 'auth and import are independent (docs/architecture.md)' },
  // Routes are a schema and one call down into the domain (the service's parts), never into SQL.
  {
    target: './src/routes',
    from: ['./src/repositories', './src/db/rules'],
    message: 'a route makes one call down into the domain, not into repositories/ (docs/architecture.md)',
  },
);

export default tseslint.config(
  {
    ignores: [
      '.dependency-cruiser.cjs',
      'dist/',
      'web/dist/',
      'node_modules/',
      'data/',
      'tmp/',
      'test-artifacts/',
      'bench-results/',
      '.test-build-*/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked.map((c) => ({ ...c, files: TYPE_CHECKED })),
  { files: TYPE_CHECKED, languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } } },
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        URL: 'readonly',
        fetch: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        TextDecoder: 'readonly',
        Buffer: 'readonly',
        performance: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
    },
  },
  {
    files: ['src/**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      ...importX.flatConfigs.typescript.settings,
      'import-x/resolver': { typescript: { project: './tsconfig.json' } },
    },
    rules: {
      'import-x/no-cycle': ['error', { ignoreExternal: true }],
      'import-x/no-restricted-paths': ['error', { zones }],
      '@typescript-eslint/no-floating-promises': ['error', { ignoreVoid: false }],
      '@typescript-eslint/no-misused-promises': 'error',
    },
  },
  // The ledger's format is also bundled into the dashboard, which checks proofs in the browser.
  {
    files: ['src/ledger-format/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ group: ['node:*'], message: 'the ledger format runs in the browser too (docs/ledger.md)' }] },
      ],
    },
  },
  { files: ['test/**'], rules: { '@typescript-eslint/no-explicit-any': 'off' } },
  {
    files: ['web/src/**'],
    languageOptions: {
      globals: {
        window: 'readonly',
        document: 'readonly',
        sessionStorage: 'readonly',
        HTMLElement: 'readonly',
        HTMLInputElement: 'readonly',
        HTMLSelectElement: 'readonly',
        RequestInit: 'readonly',
        Response: 'readonly',
        Intl: 'readonly',
        URLSearchParams: 'readonly',
        Event: 'readonly',
      },
    },
  },
);
