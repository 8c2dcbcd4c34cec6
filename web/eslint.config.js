// ESLint for the web UIs (run by scripts/test): JavaScript's and typescript-eslint's recommended
// rules, and eslint-plugin-react-hooks' recommended ones: the rules of hooks (hooks called
// unconditionally, effect dependencies complete) and the React Compiler's (no ref read or written
// during render, no setState called synchronously in an effect, pure renders, props and state never
// mutated, ...), at the plugin's levels with exhaustive-deps raised to an error.
import js from '@eslint/js'
import reactHooks from 'eslint-plugin-react-hooks'
import globals from 'globals'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['node_modules'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['src/**/*.{ts,tsx}', '*.ts'],
    languageOptions: { globals: globals.browser },
    plugins: { 'react-hooks': reactHooks },
    rules: {
      ...reactHooks.configs.flat.recommended.rules,
      'react-hooks/exhaustive-deps': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { varsIgnorePattern: '^_', argsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
    },
  },
  { files: ['public/**/sw.js'], languageOptions: { globals: globals.serviceworker } },
  { files: ['scripts/**/*.mjs', 'eslint.config.js'], languageOptions: { globals: globals.node } },
)
