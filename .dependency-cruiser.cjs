// Import cycles in src/, type-only imports included (dependency-cruiser with
// tsPreCompilationDeps): ESLint's import-x/no-cycle skips `import type`, and a cycle of types
// is still two modules that cannot be understood apart. The layering itself is ESLint's
// (eslint.config.js, docs/architecture.md). Run by `npm run lint`.
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No module may import itself back through others, types included (docs/architecture.md).',
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default'], extensions: ['.ts', '.js'] },
  },
};
