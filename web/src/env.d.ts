// Stylesheets are bundled by esbuild; importing them has no value in TypeScript.
declare module '*.css';
