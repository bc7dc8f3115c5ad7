// Lint rules for the TypeScript sources of the JupyterLab panels (flat config, ESLint 9).
import js from '@eslint/js';
import prettierConfig from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules/**',
      'lib/**',
      'cube_jupyter/labextension/**',
      '.venv/**',
      'tests/**',
      '**/*.js',
      '**/*.mjs'
    ]
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['labextension/src/**/*.{ts,tsx}'],
    languageOptions: {
      parserOptions: { project: './tsconfig.json' }
    },
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        {
          selector: 'interface',
          format: ['PascalCase'],
          custom: { regex: '^I[A-Z]', match: true }
        }
      ],
      '@typescript-eslint/no-unused-vars': ['warn', { args: 'none' }],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-floating-promises': 'error',
      curly: ['error', 'all'],
      eqeqeq: ['error', 'smart'],
      'prefer-arrow-callback': 'error'
    }
  },
  prettierConfig
);
